#version 310 es
layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

struct _4
{
    uint _m0;
    uint _m1;
};

layout(binding = 0, std430) readonly buffer _9_8
{
    float _m0[];
} _8;

layout(binding = 1, std430) buffer _12_11
{
    float _m0[];
} _11;

layout(binding = 2, std430) readonly buffer _15_14
{
    _4 _m0;
} _14;

uint _17(uint _19, uint _20)
{
    return _19 / ((_20 == 0u) ? 1u : _20);
}

uint _28(uint _29, uint _30)
{
    return _29 % ((_30 == 0u) ? 1u : _30);
}

void main()
{
    uint _61 = (((gl_WorkGroupID.y * gl_NumWorkGroups.x) + gl_WorkGroupID.x) * 64u) + gl_LocalInvocationIndex;
    if (_61 >= _14._m0._m0)
    {
        return;
    }
    uint _70 = _17(_61, _14._m0._m1);
    uint _73 = _28(_61, _14._m0._m1);
    uint _78 = ((_70 * 2u) * _14._m0._m1) + _73;
    _11._m0[_61] = (_8._m0[_78] / (1.0 + exp(-_8._m0[_78]))) * _8._m0[(((_70 * 2u) * _14._m0._m1) + _14._m0._m1) + _73];
}

