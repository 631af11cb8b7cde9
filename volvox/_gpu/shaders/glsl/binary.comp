#version 430
layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

struct _4
{
    uint _m0;
    uint _m1;
    uint _m2;
    uint _m3;
    uint _m4;
    uint _m5;
    uint _m6;
    uint _m7;
    uint _m8;
    uint _m9;
    uint _m10;
    uint _m11;
    uint _m12;
    uint _m13;
    uint _m14;
};

layout(binding = 0, std430) readonly buffer _9_8
{
    float _m0[];
} _8;

layout(binding = 1, std430) readonly buffer _12_11
{
    float _m0[];
} _11;

layout(binding = 2, std430) buffer _15_14
{
    float _m0[];
} _14;

layout(binding = 3, std430) readonly buffer _18_17
{
    _4 _m0;
} _17;

uint _48(uint _50, uint _51)
{
    return _50 % ((_51 == 0u) ? 1u : _51);
}

uint _58(uint _59, uint _60)
{
    return _59 / ((_60 == 0u) ? 1u : _60);
}

float _23(float _21, float _22)
{
    if (_22 == 2.0)
    {
        return _21 * _21;
    }
    if ((_21 < 0.0) && (_22 == roundEven(_22)))
    {
        float _41 = pow(-_21, _22);
        return (abs(_22 - 2.0 * trunc(_22 / 2.0)) == 1.0) ? (-_41) : _41;
    }
    return pow(_21, _22);
}

void main()
{
    float _83 = 0.0;
    float _86 = 0.0;
    uint _95 = (((gl_WorkGroupID.y * gl_NumWorkGroups.x) + gl_WorkGroupID.x) * 64u) + gl_LocalInvocationIndex;
    if (_95 >= _17._m0._m0)
    {
        return;
    }
    uint _105 = _48(_95, _17._m0._m3);
    uint _108 = _58(_95, _17._m0._m3);
    uint _112 = _48(_108, _17._m0._m2);
    uint _115 = _58(_108, _17._m0._m2);
    uint _118 = _48(_115, _17._m0._m1);
    uint _121 = _58(_115, _17._m0._m1);
    if (_17._m0._m14 != 0u)
    {
        _83 = _14._m0[_95];
    }
    else
    {
        _83 = _8._m0[(((_121 * _17._m0._m4) + (_118 * _17._m0._m5)) + (_112 * _17._m0._m6)) + (_105 * _17._m0._m7)];
    }
    uint _171 = (((_121 * _17._m0._m8) + (_118 * _17._m0._m9)) + (_112 * _17._m0._m10)) + (_105 * _17._m0._m11);
    switch (_17._m0._m12)
    {
        case 1u:
        {
            _86 = _83 * _11._m0[_171];
            break;
        }
        case 2u:
        {
            _86 = _83 - _11._m0[_171];
            break;
        }
        case 3u:
        {
            _86 = _83 / _11._m0[_171];
            break;
        }
        case 4u:
        {
            _86 = _23(_83, _11._m0[_171]);
            break;
        }
        default:
        {
            _86 = _83 + _11._m0[_171];
            break;
        }
    }
    if (_17._m0._m13 != 0u)
    {
        _86 = max(_86, 0.0);
    }
    _14._m0[_95] = _86;
}

